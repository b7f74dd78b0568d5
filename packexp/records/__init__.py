"""What a finished search is and shows: ``SearchResult`` (``search_result.py``: frozen, its
``to_json`` is ``results.json``; what the study makes, ``packexp.tune`` returns and
``packexp.load`` reads back), the results' arithmetic (``results.py``), the summary printed
(``report.py``) and the pictures (``plots.py``, on ``figure.py``'s figures). The journal is
the study's (``packexp/runner/study.py``); the typed events and records are
``packexp.events``."""
