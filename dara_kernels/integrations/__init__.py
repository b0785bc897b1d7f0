"""Drop-in integrations: `dara_kernels.integrations.verl` and
`dara_kernels.integrations.trl` (each imports its trainer library)."""
