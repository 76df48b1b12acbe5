"""Training: rewards and the trainers that use them."""
