"""The `dsh` command line (Typer). Heavy imports happen inside commands, never at module level."""
