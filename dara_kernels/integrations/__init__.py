"""Drop-in integrations for verl, TRL, ms-swift and SkyRL (`verl.py`, `trl.py`, `swift.py`, `skyrl.py`, each
importing its library), on one core without any library: `core.py` (settings, the op call, diagnostics),
`groups.py` (the group-signal decision) and `patching.py` (the one patch helper). The group flags and the sampling
metrics the filters share with dara-train are the op's own module, dara_kernels/group_signal.py."""
