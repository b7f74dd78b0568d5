"""Every file of every config group composes, and bad values fail with the key named."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra.utils import instantiate
from omegaconf import open_dict

from packexp.app.main import run
from packexp.config import check_space, fit_dataset_to_model
from packexp.errors import ConfigError
from packexp.space import SearchSpace
from packexp.space.dimensions import FloatRange, IntRange
from packexp.testing.config import CONF_DIR, compose_config

GROUPS = ["model", "dataset", "search_space", "strategy", "scheduler", "tracking", "executor",
          "experiment"]
CHOICES = [(g, p.stem) for g in GROUPS for p in sorted(Path(CONF_DIR, g).glob("*.yaml"))]


def test_every_group_has_a_file():
    assert {g for g, _ in CHOICES} == set(GROUPS)


@pytest.mark.parametrize(("group", "option"), CHOICES)
def test_every_file_composes_and_instantiates(group, option):
    cfg = compose_config([f"{group}={option}"])
    assert cfg.task == "tune"
    for name in GROUPS[:-1]:
        node = cfg[name]
        assert "_target_" in node, f"{name} has no _target_"
        if name not in ("dataset", "tracking"):
            assert instantiate(node) is not None


def test_the_default_is_the_embedded_quick_search():
    cfg = compose_config(strategy=None)
    assert cfg.dataset._target_ == "packexp.data.digits.load"
    assert cfg.model._target_ == "packexp.models.mlp3.build"
    assert cfg.strategy._target_ == "packexp.strategies.cost.CostStrategy"
    assert compose_config().strategy._target_ == "packexp.strategies.knn.KnnStrategy"
    assert cfg.search_space.params.batch_size[0] == 20
    assert cfg.scheduler.R <= 27


PAPER_PACK = {"fusion": "off", "data_sharing": "slice", "misaligned": "switch"}


@pytest.mark.parametrize("experiment", ["paper_method", "paper_table4"])
def test_the_papers_experiments_run_the_papers_own_pack(experiment):
    cfg = compose_config([f"experiment={experiment}"])
    assert {k: cfg.pack[k] for k in PAPER_PACK} == PAPER_PACK
    assert cfg.scheduler.continue_on_promotion is False
    default = compose_config()
    assert {k: default.pack[k] for k in PAPER_PACK} == {
        "fusion": "auto", "data_sharing": "gather", "misaligned": "mask"}
    assert default.scheduler.continue_on_promotion is True


def test_paper_table4_keeps_its_own_settings_over_the_papers_pack():
    cfg = compose_config(["experiment=paper_table4", "pack.fusion=auto"])
    assert (cfg.scheduler.R, cfg.scheduler.eta) == (81, 3)
    assert cfg.dataset._target_ == "packexp.data.cifar10.load"
    assert cfg.pack.fusion == "auto"  # the command line still wins


def test_the_ranges_space_composes_and_instantiates():
    cfg = compose_config(["search_space=ranges"])
    assert cfg.search_space.params.learning_rate == {"kind": "float", "low": 1e-4,
                                                      "high": 1e-1, "log": True}
    space = instantiate(cfg.search_space)
    check_space(space)
    assert space.dims["batch_size"] == IntRange("batch_size", 20, 70, 5)
    assert space.dims["learning_rate"] == FloatRange("learning_rate", 1e-4, 1e-1, log=True)
    assert space.dims["activation"].values == ("sigmoid", "leaky_relu", "tanh", "relu")


def test_a_list_becomes_a_range_from_the_command_line():
    """Hydra merges an override into a list only as a list: delete the list, then add."""
    cfg = compose_config(["~search_space.params.learning_rate",
                          "+search_space.params.learning_rate={kind:float,low:1e-4,high:0.1}"])
    check_space(instantiate(cfg.search_space))


LR_LOG = {"kind": "float", "low": 1e-4, "high": 1e-1, "log": True}


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"batch_size": {"kind": "float", "low": 16, "high": 64}},
         "search_space.params.batch_size: kind=float is not allowed; it must be kind=choice or "
         "kind=int (a plain list is kind=choice)"),
        ({"batch_size": {"kind": "int", "low": 0, "high": 64, "step": 16}},
         "search_space.params.batch_size=0: must be an integer >= 1"),
        ({"optimizer": {"kind": "int", "low": 0, "high": 3}},
         "search_space.params.optimizer: kind=int is not allowed; it must be kind=choice "
         "(a plain list is kind=choice)"),
        ({"activation": {"kind": "float", "low": 0, "high": 1}},
         "search_space.params.activation: kind=float is not allowed; it must be kind=choice "
         "(a plain list is kind=choice)"),
        ({"crop_padding": {"kind": "int", "low": 0, "high": 4}},
         "search_space.params.crop_padding: kind=int is not allowed; it must be kind=choice "
         "(a plain list is kind=choice)"),
        ({"learning_rate": {"kind": "float", "low": 0, "high": 0.1}},
         "search_space.params.learning_rate: low=0.0 is not a positive number"),
        ({"learning_rate": {"kind": "int", "low": 0, "high": 1}},
         "search_space.params.learning_rate: low=0 is not a positive number"),
    ],
)
def test_check_space_rules_on_kinds(params, message):
    space = SearchSpace({"batch_size": {"kind": "int", "low": 16, "high": 64, "step": 16},
                         "optimizer": ["adam"], "learning_rate": LR_LOG, **params})
    with pytest.raises(ConfigError) as info:
        check_space(space)
    assert str(info.value) == message


def test_check_space_takes_every_allowed_kind():
    check_space(SearchSpace({"batch_size": {"kind": "int", "low": 16, "high": 64},
                             "optimizer": {"kind": "choice", "values": ["adam", "sgd"]},
                             "learning_rate": LR_LOG, "activation": ["relu"],
                             "flip": [True, False],
                             "dropout": {"kind": "float", "low": 0.0, "high": 0.5}}))


def test_seed_is_wired_by_interpolation():
    cfg = compose_config(["seed=42"])
    assert cfg.strategy.seed == 42
    assert cfg.dataset.seed == 42


def test_readme_example_overrides_compose():
    cfg = compose_config(["strategy=knn", "model=mlp3", "scheduler.R=27", "seed=3"])
    assert (cfg.scheduler.R, cfg.seed) == (27, 3)


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (["scheduler.eta=1"], r"^scheduler\.eta=1: must be an integer >= 2$"),
        (["scheduler.R=0"], r"^scheduler\.R=0: must be an integer >= 1$"),
        (["seed=abc"], r"^seed='abc': must be an integer from 0 to 4294967295 "),
        (["seed=-1"], r"^seed=-1: must be an integer from 0 to 4294967295 "),
        (["seed=4294967296"], r"^seed=4294967296: must be an integer from 0 "),
        (["scheduler.R=2"],
         r"^scheduler\.R=2: Hyperband with eta=3 needs R >= 3 .* the smallest R that works is 3$"),
        (["scheduler=asha", "scheduler.R=1"], r"^scheduler\.R=1: ASHA with eta=3, min_r=1 never "
         r"promotes .*the smallest R that works is 3$"),
        (["scheduler=asha", "scheduler.num_configs=2"],
         r"^scheduler\.num_configs=2: ASHA with eta=3 promotes the top 1/eta of a rung, so it "
         r"needs at least 3 configurations$"),
        (["scheduler=pbt", "scheduler.epochs=6", "scheduler.interval=6"],
         r"^scheduler\.interval=6: with epochs=6 .*the largest interval that works is 5$"),
        (["task=train"], r"^task='train'"),
        (["search_space.params.optimizer=[]"], r"search_space\.params\.optimizer=\[\]"),
        (["search_space.params.optimizer=[adam,rmsprops]"], r"'rmsprops' is not one of"),
        (["search_space.params.batch_size=[0]"], r"batch_size=0: must be an integer >= 1"),
        pytest.param(["search_space.params.activation=[relu,swish]"],
                     r"model: .*activation='swish'", marks=pytest.mark.tf),
        (["+search_space.params.lr_schedule=[cosine,warmup]"],
         r"^search_space\.params\.lr_schedule: 'warmup' is not one of \['constant', "),
        (["scheduler.lr_horizon=epoch"], r"^scheduler\.lr_horizon='epoch': must be trial or rung$"),
        pytest.param(["+search_space.params.beta_2=[0.99,fast]"],
                     r"^search_space\.params\.beta_2: 'fast' is not a number \(an argument of "
                     r"optimizer adam\)$", marks=pytest.mark.tf),
        pytest.param(["+search_space.params.momentum=[0.9,1.5]"],
                     r"^search_space\.params\.momentum: 1\.5 does not suit optimizer sgd: ",
                     marks=pytest.mark.tf),
        (["pack.max_members=0"], r"pack\.max_members=0"),
        pytest.param(["pack.fusion=always"], r"^pack\.fusion='always': must be auto, on or off$",
                     marks=pytest.mark.tf),
        pytest.param(["pack.jit_compile=sometimes"],
                     r"^pack\.jit_compile='sometimes': must be true", marks=pytest.mark.tf),
        (["search_space=ranges", "search_space.params.batch_size.high=72"],
         r"^search_space\.params\.batch_size: high=72 is not low=20 plus a multiple of step=5"),
        (["search_space=ranges", "search_space.params.learning_rate.log=false",
          "search_space.params.learning_rate.low=0"],
         r"^search_space\.params\.learning_rate: low=0\.0 is not a positive number$"),
        (["search_space=ranges", "search_space.params.batch_size.kind=float",
          "~search_space.params.batch_size.step"],
         r"^search_space\.params\.batch_size: kind=float is not allowed; it must be "
         r"kind=choice or kind=int \(a plain list is kind=choice\)$"),
        (["strategy.threshold=-1"], r"^strategy\.threshold=-1"),
        pytest.param(["model.width=0"], r"^model: .*width=0", marks=pytest.mark.tf),
        (["dataset.val_fraction=2"], r"^dataset\.val_fraction=2"),
        pytest.param(["preprocess.flip=maybe"],
                     r"^preprocess\.flip='maybe': must be true or false$", marks=pytest.mark.tf),
        (["dataset=synthetic", "dataset.num_classes=1"],
         r"^dataset\.num_classes=1: must be an integer >= 2 \(with one class"),
        (["summary_top_k=-1"], r"^summary_top_k=-1: must be null or an integer >= 0$"),
        (["device.gpu_memory_fraction=1.5"], r"^device\.gpu_memory_fraction=1\.5: must be"),
        (["device.memory_budget_mb=0"], r"^device\.memory_budget_mb=0: must be a positive"),
        (["model=mobilenet", "dataset.images=false"],
         r"^dataset\.images=false: model mobilenet needs images \[height, width, channels\], "
         r"and dataset digits gives feature vectors \[64\]; use dataset\.images=auto"),
        (["model=resnet50", "dataset=synthetic", "dataset.shape=[64]"],
         r"^dataset\.shape=\[64\]: model resnet50 needs images .*give dataset\.shape="),
        pytest.param(["model=mobilenet", "model.bn_momentum=1.5"],
                     r"^model: .*bn_momentum=1\.5: must be", marks=pytest.mark.tf),
        (["model._target_=your_models.cnn.build"],
         r"^model\._target_='your_models\.cnn\.build': cannot be imported \("
         r"ModuleNotFoundError: No module named 'your_models'\); run python -m packexp where "
         r"your_models is importable"),
        (["model._target_=packexp.models.mlp3.buidl"],
         r"^model\._target_='packexp\.models\.mlp3\.buidl': cannot be imported"),
        pytest.param(["+search_space.params.width=[16,0]"],
                     r"^model: cannot build for digits \[64\]: width=0: must be an integer",
                     marks=pytest.mark.tf),
        pytest.param(["model._target_=tests.engine.test_config.two_heads"],
                     r"^model: on digits \[64\]: the model returns list of 2 for a batch of 2; "
                     r"it must return logits \[batch, 10\]$", marks=pytest.mark.tf),
        pytest.param(["model._target_=tests.engine.test_config.failing"],
                     r"^model: cannot build for digits \[64\] with \{'activation': 'sigmoid'\}: "
                     r"KeyError: 'units'$",
                     marks=pytest.mark.tf),
    ],
)
def test_bad_values_raise_one_line_naming_the_key(tmp_path, overrides, match):
    cfg = compose_config(["tracking=none", *overrides])
    with pytest.raises(ConfigError, match=match) as info:
        run(cfg, run_dir=tmp_path)
    assert "\n" not in str(info.value)
    assert not (tmp_path / "results.json").exists()


@pytest.mark.parametrize(("model", "images"), [("mlp3", False), ("mobilenet", True),
                                                ("resnet50", True), ("densenet121", True)])
def test_digits_gives_images_to_a_model_that_needs_them(model, images):
    cfg = compose_config([f"model={model}"])
    assert cfg.dataset.images == "auto"
    fit_dataset_to_model(cfg)
    assert cfg.dataset.images is images
    shape = instantiate(cfg.dataset).input_shape
    assert shape == ((8, 8, 1) if images else (64,))


@pytest.mark.tf
@pytest.mark.parametrize("dataset", ["digits", "synthetic"])
@pytest.mark.parametrize("model", ["mobilenet", "resnet50", "densenet121"])
def test_every_cnn_runs_on_the_embedded_datasets_without_extra_keys(tmp_path, dataset, model):
    """task=plan composes, checks the pairing and builds the model on the data as given."""
    cfg = compose_config(["tracking=none", "task=plan", f"model={model}", f"dataset={dataset}"])
    run(cfg, run_dir=tmp_path)
    assert (tmp_path / "plan.json").exists()


@pytest.mark.parametrize("images", [True, False])
def test_an_explicit_images_setting_is_kept(images):
    cfg = compose_config(["model=mobilenet", f"dataset.images={images}"])
    fit_dataset_to_model(cfg)
    assert cfg.dataset.images is images


def test_missing_target_is_reported(tmp_path):
    cfg = compose_config(["tracking=none"])
    with open_dict(cfg):
        del cfg.strategy._target_
    with pytest.raises(ConfigError, match="strategy: no _target_"):
        run(cfg, run_dir=tmp_path)


def two_heads(input_shape, num_classes, hparams, **settings):
    """A model of two outputs, which packexp cannot train."""
    import keras

    x = keras.Input(tuple(input_shape))
    return keras.Model(x, [keras.layers.Dense(num_classes)(x), keras.layers.Dense(2)(x)])


def failing(input_shape, num_classes, hparams, **settings):
    """A user's builder failing with something other than a ValueError."""
    return hparams["units"]
