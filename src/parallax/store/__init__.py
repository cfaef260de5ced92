"""What Parallax writes and where: the result files and their atomic writes (``results``), the
one UTC timestamp format (``timestamps``), the cache root (``cache``)."""
