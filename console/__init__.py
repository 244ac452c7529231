"""campaign-console's terminal console: a Textual client of the runner. It never imports torch and
never signals a process itself: every action is a request on the runner's socket."""
