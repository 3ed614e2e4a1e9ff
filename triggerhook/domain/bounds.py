"""The range of due times, in epoch milliseconds (UTC): below every domain module."""

MIN_DUE_MS = 0  # 1970-01-01T00:00:00Z
MAX_DUE_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z
