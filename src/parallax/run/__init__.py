"""Running: the driver of one training run (``train``), the launcher of several processes
(``distributed``), the benchmark's matrix runner (``runner``) and the live progress
(``progress``, ``progress_file``)."""
