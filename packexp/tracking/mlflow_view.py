"""The view of the MLflow UI's runs table saved on packexp's experiments (its ``Views``)."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

# MLflow 3.17's UI keeps a saved view as the experiment tag ``mlflow.sharedViewState.<id>``:
# {"name", "createdAt" (ms), "state"}, the state a JSON string of the page's search facets and
# UI state (its columns as "<type>.`<key>`"). The id opens it: ?viewStateShareKey=<id>.
VIEW_PREFIX = "mlflow.sharedViewState."
VIEW_ID = "packexp-searches"
VIEW_NAME = "packexp: searches"
NAME_WIDTH_PX = 400  # a default search's whole name (46 characters)
# What tells the searches apart, then what they found, then what they cost.
COLUMNS = (("params", "strategy"), ("params", "seed"), ("tags", "job_num"),
           ("params", "objective.metric"), ("metrics", "best_value"), ("metrics", "trials"),
           ("metrics", "wall_time_s"))


def column(kind: str, key: str) -> str:
    """A column's id as the UI spells it (its ``makeCanonicalSortKey``)."""
    return f"{kind}.`{key}`"


def view_state() -> dict[str, Any]:
    """The page's columns, in ``COLUMNS``' order after the run's name, newest run first."""
    columns = [column(kind, key) for kind, key in COLUMNS]
    fixed = [column("attributes", name) for name in ("Run Name", "Created")]
    return {"selectedColumns": columns, "columnOrder": fixed + columns,
            "columnWidths": {fixed[0]: NAME_WIDTH_PX, column("metrics", "best_value"): 130},
            "orderByKey": "attributes.start_time", "orderByAsc": False}


def view_tags(tags: Mapping[str, str]) -> dict[str, str]:
    """The saved view's tag, to set on an experiment of ``tags`` that does not hold this view
    (none when it does; a user's own views are other tags)."""
    key = VIEW_PREFIX + VIEW_ID
    state = json.dumps(view_state(), separators=(",", ":"))
    try:
        held = json.loads(tags.get(key) or "{}")
    except ValueError:
        held = {}
    if isinstance(held, dict) and held.get("name") == VIEW_NAME and held.get("state") == state:
        return {}
    now_ms = int(time.time() * 1000)
    value = {"name": VIEW_NAME, "createdAt": now_ms, "updatedAt": now_ms, "state": state}
    return {key: json.dumps(value, separators=(",", ":"))}
