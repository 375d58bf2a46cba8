-- lock every pool
-- Pools are locked plainly, in name order, by whoever queues: the last lock taken.
SELECT pool.name, pool.slots 
FROM pool ORDER BY pool.name FOR UPDATE
