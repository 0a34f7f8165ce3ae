"""The doit side: the registry of task kinds, the command line, the wiring between doit and the stages, interrupts, the run lock and `doit clean`."""
