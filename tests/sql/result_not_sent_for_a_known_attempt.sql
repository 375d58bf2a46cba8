-- result not sent for a known attempt
-- A success's result is left out when its attempt id is in the process's list of attempts
-- whose result it holds (',a1,a2,': each id matched whole, between commas; at most COPIES
-- of them).
CASE WHEN (task_instance.state = %(state_1)s::VARCHAR AND (%(known_attempts)s::VARCHAR LIKE '%%' || ',' || task_instance.attempt_id || ',' || '%%')) THEN NULL ELSE task_instance.result END
