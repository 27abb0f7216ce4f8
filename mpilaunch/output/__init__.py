"""What a person and a program read of a job: status lines, the summary, the
event record, the exit status."""
