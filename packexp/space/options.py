"""What a pack is, without TensorFlow: the pack settings (their one definition, defaults
included), the optimizers and the learning-rate schedules, a member's and a pack's structure
(the keys that say which packs share a built program) and a member's steps. The config checks
a run against it; ``Pack`` its arguments; the strategies and the cache key packs by it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Protocol

from packexp.errors import positive_int
from packexp.optim import RULES

# Each setting's values; ``pack:`` in conf/config.yaml says what they mean.
CHOICES: dict[str, tuple[Any, ...]] = {
    "misaligned": ("mask", "switch"),
    "data_sharing": ("gather", "slice"),
    "fusion": ("auto", "on", "off"),
    "loop": ("auto", "off"),
    "grouped_conv": ("auto", "native", "split"),
    "jit_compile": (True, False, "auto"),
}

# The integer settings: each one's least value, and what its message adds.
LEAST: dict[str, tuple[int, str]] = {
    "max_members": (1, ""),
    "reuse": (0, " (packs kept for reuse; 0 builds every pack afresh)"),
    "chunk_steps": (1, ""),
    "eval_batch_size": (1, ""),
}

# The settings ``Pack`` takes as keyword arguments; the others are the search's.
PACK_ARGS = ("misaligned", "data_sharing", "fusion", "loop", "grouped_conv", "jit_compile",
             "chunk_steps", "eval_batch_size")

# Learning-rate profiles over a member's budget (``packing/schedules.py`` defines them), and
# what a schedule's horizon is: the trial's largest budget (Hyperband's R) or its rung's.
LR_SCHEDULES = ("constant", "step", "linear", "cosine", "exponential", "rex")
LR_HORIZONS = ("trial", "rung")

# Optimizer arguments under which an update is more than its optimizer's rule (Keras applies
# them around it): a member with any of them set trains in a plain pack, through Keras.
EXTRAS = ("weight_decay", "clipnorm", "clipvalue", "global_clipnorm", "use_ema",
          "gradient_accumulation_steps", "loss_scale_factor")
# Variants of an update rule that the fused rules do not have.
VARIANTS = ("nesterov", "amsgrad")


def check_choice(setting: str, value: Any) -> None:
    """Raises ``ValueError("setting=value: must be ...")`` unless ``value`` is a choice."""
    choices = CHOICES[setting]
    # By type as well as value: YAML's true is not 1, and 1 is not true.
    if not any(type(value) is type(c) and value == c for c in choices):
        names = ["true" if c is True else "false" if c is False else str(c) for c in choices]
        raise ValueError(f"{setting}={value!r}: must be {', '.join(names[:-1])} or {names[-1]}")


def check_setting(setting: str, value: Any) -> None:
    """Raises ``ValueError("setting=value: must be ...")`` unless ``value`` suits the pack
    setting: one of its ``CHOICES``, or an integer of at least its ``LEAST``."""
    if setting in CHOICES:
        check_choice(setting, value)
        return
    least, why = LEAST[setting]
    positive_int(setting, value, least, why=why)


@dataclass(frozen=True)
class PackSettings:
    """The pack settings and their defaults: the one definition. ``pack:`` in
    conf/config.yaml states these values and says more of what they mean (a test holds the
    two equal); ``Pack``'s keyword arguments default to them. Checked when built.

    Attributes:
        max_members: Most members in one pack, on top of the device's memory capacity.
        misaligned: Members whose step budgets differ: ``mask`` skips a finished member's
            step; ``switch`` (the paper's) rebuilds the step function without it.
        data_sharing: ``gather``: each member its own batches from the one device copy;
            ``slice`` (the paper's): one stream of the largest batch, sliced per member.
        fusion: ``auto``: members of one architecture train as one fused model where it
            pays (Dense models; CNNs on a GPU); ``on``: wherever the layers allow; ``off``:
            the plain pack of separate models.
        loop: A plain, uncompiled pack of one architecture: ``auto`` runs it as one program
            that loops over its members and holds one model's graph, traced once per
            architecture for packs of every size (``packing.looped``); ``off``: every
            member's graph side by side in the pack's own program.
        grouped_conv: A fused pack's Conv2D layers: ``native`` (one grouped convolution),
            ``split`` (one per member) or ``auto`` (native where TensorFlow can
            differentiate it).
        jit_compile: XLA for a pack's step function: ``auto`` (packs of models without
            convolutions, masked and gathered), True (every pack) or False (none).
        reuse: Packs kept for later packs of the same structure; 0 builds every pack afresh.
        chunk_steps: Pack steps per call into the step function.
        eval_batch_size: Validation examples per evaluation call.
    """

    max_members: int = 8
    misaligned: str = "mask"
    data_sharing: str = "gather"
    fusion: str = "auto"
    loop: str = "auto"
    grouped_conv: str = "auto"
    jit_compile: bool | str = "auto"
    reuse: int = 32
    chunk_steps: int = 500
    eval_batch_size: int = 1024

    def __post_init__(self) -> None:
        for f in fields(self):
            check_setting(f.name, getattr(self, f.name))

    @classmethod
    def from_config(cls, pack: Mapping[str, Any]) -> PackSettings:
        """The settings ``pack`` (``cfg.pack``) gives, checked: raises the first bad value's
        ``ValueError("key=value: must be ...")``. A key it lacks keeps its default."""
        return cls(**{f.name: pack[f.name] for f in fields(cls) if f.name in pack})

    @property
    def pack_options(self) -> dict[str, Any]:
        """The settings ``Pack`` reads, as a dict (a pack cache's and a profile's options)."""
        return {k: getattr(self, k) for k in PACK_ARGS}


PACK_DEFAULTS = PackSettings()

FUSED, LOOPED, PLAIN = "fused", "looped", "plain"  # a pack's programs
SINGLE = "a pack of one member has nothing to fuse"


class PackFacts(Protocol):
    """What a pack's program depends on beyond its settings. ``choose_program`` reads them in
    this order and only as far as its choice needs, so the pack engine works out its members'
    facts when first asked (``packing.pack``); a planner gives what it knows."""

    members: int
    convolutional: bool  # a member's model holds convolutions
    gpu: bool  # packs train on a GPU (read only for convolutions)
    unfusable: str | None  # why the members' layers, update rules or inputs cannot fuse
    unloopable: str | None  # why they cannot share one looped program


@dataclass(frozen=True)
class Facts:
    """``PackFacts`` known up front (``strategies.cost``: from the trials and calibration)."""

    members: int
    convolutional: bool = False
    gpu: bool = False
    unfusable: str | None = None
    unloopable: str | None = None


@dataclass(frozen=True)
class Program:
    """The program a pack trains with: ``fused`` (one fused model), ``looped`` (one model's
    graph looping over the members, never compiled) or ``plain`` (every member's graph side
    by side); compiled with XLA or not; and why it is not fused or not looped, for the log."""

    kind: str
    xla: bool
    unfused: str | None = None
    unlooped: str | None = None


def compiles(settings: PackSettings, convolutional: bool) -> bool:
    """Whether a pack's step compiles with XLA: ``jit_compile=True``, or ``auto`` where one
    program serves the pack to its end (masked, gathered batches) and it holds no
    convolutions. Measured: the paper's method (switch, slice) took 95 s for a knn search at
    R=27 compiled, 48 s not."""
    return settings.jit_compile is True or (
        settings.jit_compile == "auto" and settings.misaligned == "mask"
        and settings.data_sharing == "gather" and not convolutional)


def choose_program(facts: PackFacts, settings: PackSettings,
                   fusion: str | None = None) -> Program:
    """The one choice of a pack's program, made alike by the pack engine (``Pack``), the
    pack cache and the cost model: fused where ``fusion`` (the pack's, else the settings')
    fuses these members, else looped where an uncompiled plain pack of one architecture can
    loop (``pack.loop``), else plain.

    ``auto`` fuses packs of two or more members: Dense models everywhere, CNNs on a GPU.
    ``on`` fuses wherever the layers allow, one member and CNNs on a CPU included (there
    TensorFlow's grouped convolution is oneDNN's; measured no consistently faster than the
    plain pack). ``off`` never fuses.
    """
    fusion = settings.fusion if fusion is None else fusion
    if fusion == "off":
        unfused: str | None = "pack.fusion=off"
    elif fusion == "auto" and facts.members < 2:
        unfused = SINGLE
    elif settings.data_sharing != "gather":
        unfused = "fusion needs gather data sharing"
    else:
        unfused = facts.unfusable
        if unfused is None and fusion == "auto" and facts.convolutional and not facts.gpu:
            unfused = ("convolutions fuse into grouped convolutions on a GPU only; on a CPU "
                       "the pack trains unfused (pack.fusion=on fuses it anyway)")
    xla = compiles(settings, facts.convolutional)
    if unfused is None:
        return Program(FUSED, xla)
    if settings.loop == "off":
        unlooped: str | None = "pack.loop=off"
    elif xla:
        unlooped = "its step compiles with XLA"
    elif settings.data_sharing != "gather":
        unlooped = "a looped pack needs gather data sharing"
    elif settings.misaligned != "mask":
        unlooped = "a looped pack masks finished members (misaligned=mask)"
    else:
        unlooped = facts.unloopable
    return Program(PLAIN if unlooped else LOOPED, xla, unfused, unlooped)


def fusion_modes(facts: PackFacts, settings: PackSettings) -> tuple[str, ...]:
    """The fusion settings a planner may give a pack (``Pack``'s ``fusion``): under ``auto``,
    ``on`` and ``off`` where the pack engine would fuse it, else ``off``; under ``on`` or
    ``off``, the one the engine would take."""
    fused = choose_program(facts, settings).kind == FUSED
    if settings.fusion == "auto":
        return ("off", "on") if fused else ("off",)
    return ("on",) if fused else ("off",)


@dataclass(frozen=True)
class OptimizerSpec:
    """An optimizer a search space may name.

    Attributes:
        keras_class: Its ``keras.optimizers`` class.
        slots: The state it keeps per trainable weight, in the fused pack's layout (``m``:
            a first moment or momentum, ``v``: a second moment or sum of squares) mapped to
            the Keras optimizer's attribute that holds it.
        options: Its constructor arguments besides the learning rate.
        fused: Whether a fused pack has its update rule.
    """

    keras_class: str
    slots: Mapping[str, str]
    options: Mapping[str, float] = field(default_factory=dict)
    fused: bool = True


OPTIMIZERS: dict[str, OptimizerSpec] = {
    # One general update serves these (``packexp/optim/``, one module each), in plain and
    # fused packs alike; each member keeps both slots, whichever rule it runs.
    **{name: OptimizerSpec(rule.KERAS_CLASS, {"m": "_m", "v": "_v"}, rule.DEFAULTS)
       for name, rule in RULES.items()},
    # Keras's own update, in plain packs only (a fused pack has no rule for them; a member
    # with one of these makes its pack plain). Defaults are Keras's.
    "adamw": OptimizerSpec("AdamW", {"m": "_momentums", "v": "_velocities"}, fused=False),
    "nadam": OptimizerSpec("Nadam", {"m": "_momentums", "v": "_velocities"}, fused=False),
    "adamax": OptimizerSpec("Adamax", {"m": "_m", "v": "_u"}, fused=False),
    "rmsprop": OptimizerSpec("RMSprop", {"v": "_velocities"}, fused=False),
    "adadelta": OptimizerSpec("Adadelta", {"m": "_accumulated_delta_vars",
                                           "v": "_accumulated_grads"}, fused=False),
    "lion": OptimizerSpec("Lion", {"m": "_momentums"}, fused=False),
    "ftrl": OptimizerSpec("Ftrl", {"m": "_linears", "v": "_accumulators"}, fused=False),
}


# Every constructor argument of the optimizers' Keras classes but the learning rate and name
# (``packing.optimizers.optimizer_args``; a test holds the two equal): a trial setting one its
# rule lacks trains through the Keras class.
KERAS_ARGS = frozenset({
    "amsgrad", "beta", "beta_1", "beta_2", "centered", "clipnorm", "clipvalue", "ema_momentum",
    "ema_overwrite_frequency", "epsilon", "global_clipnorm", "gradient_accumulation_steps",
    "initial_accumulator_value", "l1_regularization_strength", "l2_regularization_strength",
    "l2_shrinkage_regularization_strength", "learning_rate_power", "loss_scale_factor",
    "momentum", "nesterov", "rho", "use_ema", "weight_decay"})


#: The defaults of values a space may leave out, stated once: every model and the trainer
#: read them through ``activation_of`` and ``lr_schedule_of`` (``Trial.activation`` and
#: ``Trial.lr_schedule``).
DEFAULT_ACTIVATION = "relu"
DEFAULT_LR_SCHEDULE = "constant"


def activation_of(hparams: Mapping[str, Any]) -> str:
    """The activation a configuration trains with."""
    return hparams.get("activation", DEFAULT_ACTIVATION)


def lr_schedule_of(hparams: Mapping[str, Any]) -> str:
    """The learning-rate schedule a configuration trains with (``LR_SCHEDULES``)."""
    return hparams.get("lr_schedule", DEFAULT_LR_SCHEDULE)


def rule_for(hparams: Mapping[str, Any], keras_args: frozenset[str] = KERAS_ARGS) -> str | None:
    """The update rule (``packexp.optim``) that trains a trial with ``hparams``; None when
    only its Keras class does (an optimizer without a rule, an extra such as weight decay, a
    variant such as Nesterov, or a Keras argument in ``keras_args`` that the rule lacks).
    Without TensorFlow, ``keras_args`` is every Keras class's: at least as strict as the
    optimizer's own arguments, which ``make_optimizer`` passes."""
    name = hparams.get("optimizer")
    if name not in RULES or any(hparams.get(a) for a in (*EXTRAS, *VARIANTS)):
        return None
    if any(hparams.get(a) is not None and a not in RULES[name].DEFAULTS for a in keras_args):
        return None
    return name


def why_not_fusable(hparams: Mapping[str, Any]) -> str | None:
    """None when a fused pack has the update rule of a trial with ``hparams``; else why not.

    Decided from the names alone, as ``packing.optimizers.optimizer_kind`` decides it from the
    built optimizer, so the cost model plans with what the pack engine will do.
    """
    name = hparams.get("optimizer")
    spec = OPTIMIZERS.get(name)
    if spec is None or not spec.fused:
        return f"optimizer={name} has no fused update rule"
    for arg in (*EXTRAS, *VARIANTS):
        if hparams.get(arg):
            return f"{arg}={hparams[arg]!r} has no fused update rule ({name} applies it)"
    if rule_for(hparams) is None:
        return f"optimizer={name} with these options has no fused update rule"
    return None


class Configured(Protocol):
    """A trial as the keys read it (``search_space.Trial``)."""

    hparams: Mapping[str, Any]


def steps_for(epochs: float, batch_size: int, train_size: int) -> int:
    """Steps that ``epochs`` epochs amount to at ``batch_size`` (at least one)."""
    return max(1, round(epochs * (train_size // batch_size)))


# Hyper-parameters that are values of a member's variables or of the step's inputs: they
# never change what the pack engine builds or traces. (Sliced batches are cut at traced
# sizes, so under data_sharing=slice the batch size is structure too.)
RUNTIME_HPARAMS = ("batch_size", "learning_rate")


def runtime_hparams(hparams: Mapping[str, Any], sliced: bool = False,
                    model: Sequence[str] = ()) -> frozenset[str]:
    """The hyper-parameters of a trial that are runtime data of a built member: the batch
    size and learning rate, the optimizer and its options where an update rule runs it
    (``packexp.optim``: its rule is a row of coefficients), and the model's ``model``
    (a builder's ``RUNTIME_HPARAMS``, such as mlp3's ``activation``)."""
    runtime = set(RUNTIME_HPARAMS[1:] if sliced else RUNTIME_HPARAMS) | set(model)
    rule = rule_for(hparams)
    if rule is not None:
        runtime |= {"optimizer", *RULES[rule].DEFAULTS}
    return frozenset(runtime)


def member_key(trial: Configured, sliced: bool = False, model: Sequence[str] = ()) -> tuple:
    """A trial's member structure: every hyper-parameter that shapes its model or optimizer,
    that is every one but ``runtime_hparams``."""
    runtime = runtime_hparams(trial.hparams, sliced, model)
    return tuple(sorted((k, repr(v)) for k, v in trial.hparams.items() if k not in runtime))


def member_bucket(n: int) -> int:
    """The member count a compiled program of ``n`` members is built for: the next power of
    two (1, 2, 4, 8, ...); a smaller pack fills the rest with idle seats."""
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def pack_key(trials: Sequence[Configured], sliced: bool = False, fusion: str | None = None,
             model: Sequence[str] = (), bucketed: bool = False) -> tuple:
    """A pack's structure: its members' structures in a canonical order, whether their batch
    sizes differ (a fused pack masks padded rows only then) and its fusion setting. Packs of
    one structure run on the same built models and traced step functions.

    ``bucketed``: the pack runs a compiled program, its batches padded to the search's
    bucket (so differing sizes are no structure) and, when its members share one structure,
    its member count rounded up to ``member_bucket``."""
    keys = sorted(member_key(t, sliced, model) for t in trials)
    if bucketed:
        if len(set(keys)) == 1:
            keys = keys[:1] * member_bucket(len(keys))
        return (*keys, None, fusion)
    mixed = len({t.batch_size for t in trials}) > 1
    return (*keys, mixed, fusion)
