"""One attempt, started and supervised: the starter's process, its relays, the
user's signals and the control channel every adapter holds open."""
