"""Every file the project reads or writes, as untrusted input: regular files only, read bounded from their descriptor; JSON with bounds; a folder's files confined to it; whole-or-nothing writes."""
