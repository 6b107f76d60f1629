"""Rules over all ranks of a job (stragglers, exposed communication, imbalance) and the numbers they share."""
