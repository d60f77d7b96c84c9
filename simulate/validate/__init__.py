"""`costmodel validate`: a real load run on the GPU, its simulation, and the score between them."""
