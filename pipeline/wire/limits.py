"""Size limits of the wire: what a worker accepts before it refuses a record as oversize."""

MAX_TRIGGER_BYTES = 1_048_576
MAX_TRAJECTORY_CHARS = 2_000_000  # one projection call's context ceiling (DPM paper: ~1M characters)
MAX_DEAD_LETTER_DETAIL_CHARS = 2_000
# A dead letter always fits in a record: the refused bytes are kept whole up to these sizes, and
# beyond them cut, with their full size and SHA-256 (the original stays on its source topic,
# whose position the dead letter names). Base64 makes 256 KiB about 350 KB.
MAX_DEAD_LETTER_VALUE_BYTES = 256 * 1024
MAX_DEAD_LETTER_KEY_BYTES = 4 * 1024
# The dead letter's own Kafka key is the original key up to this size, else its digest.
MAX_DEAD_LETTER_RECORD_KEY_BYTES = 1024
