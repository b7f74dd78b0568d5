"""A run's records, read and written: the journal (``journal.py``, what resume reads), the
results (``results.py``: ``results.json``'s arithmetic), ``SearchResult`` (``search_result.py``:
what ``packexp.tune`` returns and ``packexp.load`` reads back), the summary printed
(``report.py``) and the pictures (``plots.py``, on ``figure.py``'s figures). The typed
events and records they are made from are ``packexp.events``."""
