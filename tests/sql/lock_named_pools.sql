-- lock named pools
SELECT pool.name, pool.slots 
FROM pool 
WHERE pool.name IN (__[POSTCOMPILE_names]) ORDER BY pool.name FOR UPDATE
