"""The smallest DAG: one task, manual runs only."""

from sluice import DAG, task

with DAG("example_hello", schedule=None) as dag:

    @task
    def hello(context):
        print(f"hello from {context['dag_id']} try {context['try_number']}")
        return "hello"
