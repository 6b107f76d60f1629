"""What a trace is, built once per trace and read by every rule: see README.md beside this file."""
