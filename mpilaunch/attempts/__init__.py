"""Jobs that outlive one attempt: the attempts loop, restarts (in place too),
--min-hosts shrink, host discovery."""
