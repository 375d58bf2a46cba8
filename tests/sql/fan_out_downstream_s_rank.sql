-- fan-out downstream's rank
ready.rank
