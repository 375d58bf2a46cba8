-- lock one pool
SELECT pool.name, pool.slots 
FROM pool 
WHERE pool.name = %(name)s::VARCHAR ORDER BY pool.name FOR UPDATE
