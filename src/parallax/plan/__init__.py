"""Where a spec meets the machine: what this machine has (``envinfo``, ``hardware``), which
recipes can run on it (``capability``)."""
