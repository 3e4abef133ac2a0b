"""kubecua-tasks: task families as installable generators (entry-point group
`kubecua.task_families`), the `kubecua tasks` command, and verification of a family's tasks on
real desktops into a verified manifest (docs/tasks.md)."""
