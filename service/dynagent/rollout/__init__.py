"""What a rollout decides beyond routing: decisions written back to the config source
(pulls, pauses, steps, promotions), the canary's shadow copy, and session pins."""
