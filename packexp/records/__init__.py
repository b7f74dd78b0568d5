"""A search's record and what shows it: the typed, frozen records (``record.py``), the
``SearchResult`` (``search_result.py``: ``to_json``/``from_json`` are ``results.json``; what
the study makes, ``packexp.tune`` returns and ``packexp.load`` reads back), arithmetic over
them (``results.py``), the summary printed (``report.py``) and the pictures (``plots.py``, on
``figure.py``'s figures). The journal is the study's (``packexp/runner/study.py``); the typed
events are ``packexp.events``."""
