"""Generation stage: official step prompts, model client, answer loops, and the per-problem driver."""
