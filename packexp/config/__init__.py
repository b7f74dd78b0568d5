"""The composed config read and checked: resolved (``resolvers``), instantiated (``targets``),
checked before TensorFlow loads (``checks``, ``settings``, ``hparams``), the model probed
(``probes``), and named and flattened for the run's records (``choices``)."""

from packexp.config.checks import (
    check_batch_sizes,
    check_pairing,
    check_search,
    check_space,
    head_of,
)
from packexp.config.choices import component_name, flatten, task_overrides, without_keys
from packexp.config.hparams import (
    PREPROCESS_KEYS,
    REQUIRED_HPARAMS,
    TRAINING_HPARAMS,
    model_hparams,
)
from packexp.config.probes import check_logits, probe_model, probe_optimizers
from packexp.config.resolvers import (
    config_error_in,
    config_errors,
    constructor_default,
    register_resolvers,
    unimportable,
)
from packexp.config.settings import (
    batch_bucket,
    budget_of,
    member_cap,
    pack_settings,
    reuse_setting,
)
from packexp.config.targets import (
    HEAD_KEYS,
    SPACE_TARGET,
    dataset_source,
    fit_dataset_to_model,
    instantiate,
    load_dataset,
    model_node,
    space_node,
)

__all__ = ["HEAD_KEYS", "PREPROCESS_KEYS", "REQUIRED_HPARAMS", "SPACE_TARGET", "TRAINING_HPARAMS",
           "batch_bucket", "budget_of", "check_batch_sizes", "check_logits", "check_pairing",
           "check_search", "check_space", "component_name", "config_error_in", "config_errors",
           "constructor_default", "dataset_source", "fit_dataset_to_model", "flatten", "head_of",
           "instantiate", "load_dataset", "member_cap", "model_hparams", "model_node",
           "pack_settings", "probe_model", "probe_optimizers", "register_resolvers",
           "reuse_setting", "space_node", "task_overrides", "unimportable", "without_keys"]
