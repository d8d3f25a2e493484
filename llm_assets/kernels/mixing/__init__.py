"""What the train split holds of each document: source mixtures, class balance and augmented
copies."""
