"""Token sources: synthetic batches, and real TinyStories through the native loader."""
