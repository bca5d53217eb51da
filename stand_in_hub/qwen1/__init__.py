"""Our own remote code for the stand-in Qwen-1 repositories (see the stand_in_hub package docstring)."""
