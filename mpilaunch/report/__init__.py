"""``mpilaunch report LOG_DIR``: the job's event record (docs/EVENTS.md) drawn as a timeline.
model.py reads the record into phases (pure), html.py writes the self-contained page,
png.py the same timeline with matplotlib (optional), command.py is the command."""
