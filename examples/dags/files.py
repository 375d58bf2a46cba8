from sluice import DAG, task

with DAG("files", schedule=None) as dag:

    @task
    def list_files() -> list[str]:
        return ["a.csv", "b.csv", "c.csv"]

    @task(retries=2)
    def load(path: str, table: str) -> int:
        return len(path)

    @task
    def total(counts: list[int]) -> int:
        return sum(counts)

    counts = load.partial(table="raw").expand(path=list_files())
    total(counts)
