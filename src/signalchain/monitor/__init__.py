"""Layer 3: live, cheap, in-loop measurements and triggers."""
