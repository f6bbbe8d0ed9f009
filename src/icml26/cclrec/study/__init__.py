"""The cclrec claim's experiment helpers (inputs, targets and power checks); not the library."""
