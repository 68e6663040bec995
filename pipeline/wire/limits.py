"""Size limits of the wire: what a worker accepts before it refuses a record as oversize."""

MAX_TRIGGER_BYTES = 1_048_576
MAX_TRAJECTORY_CHARS = 2_000_000  # one projection call's context ceiling (DPM paper: ~1M characters)
MAX_DEAD_LETTER_DETAIL_CHARS = 2_000
