"""The compile stage: a resolved ``Schedule`` + a tensor inventory -> a
``Plan`` of byte ranges per hook point (``compile``), plain data that
round-trips through JSON (``plan``)."""
