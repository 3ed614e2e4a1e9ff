"""MySQL/MariaDB adapter: the only package that imports the database driver."""
