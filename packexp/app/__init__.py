"""The shell: the command (``cli``, ``main``), its help and start-up, signals, the Python API
(``api``) and the tasks a command runs (``tasks/``). Nothing below it imports it."""
