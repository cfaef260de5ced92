"""Reading results: statistics (``stats``), which runs may be compared (``comparability``), the
comparison record of a benchmark (``compare``), the crossover study (``crossover``), numerical
agreement of the engines (``parity``) and the renderers of a comparison (``report``)."""
