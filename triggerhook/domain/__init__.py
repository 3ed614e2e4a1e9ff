"""Pure domain: tasks, time parsing and the due-time heap. No I/O here."""
