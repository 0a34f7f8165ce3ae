"""Run configuration: the declared settings, how raw values are read, the fingerprints over them, what a command line
asks for (`command_line`), the problems it looks at (`view`) and the shape of a doit task kind (`task_kind`)."""
