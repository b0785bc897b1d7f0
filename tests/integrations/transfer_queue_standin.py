"""An in-process stand-in for TransferQueue's kv_batch_put and kv_batch_get, the
two calls verl's v1 trainer (and the integration) make around
`_compute_advantage`, so that the v1 tests need no Ray. It answers as
TransferQueue 0.1.11's SimpleStorage does on a local Ray (the Ray test in
test_verl.py runs the real one): every tensor field comes back as a jagged
nested tensor, even when all rows have one length; any other field as a
NonTensorStack; rows in the order of the keys asked for; a field that the
rows lack is left out without an error; an unknown key raises ValueError."""
import torch
from tensordict import NonTensorStack, TensorDict
from transfer_queue import KVBatchMeta


class TransferQueueStandIn:
    def __init__(self):
        self.rows: dict = {}  # (partition, key) -> {field: value}
        self.tags: dict = {}
        self.gets: list = []  # select_fields of each kv_batch_get, in call order

    def kv_batch_put(self, keys, partition_id, fields=None, tags=None):
        columns = {name: _unstack(fields[name]) for name in fields.keys()} if fields is not None else {}
        for i, key in enumerate(keys):
            row = self.rows.setdefault((partition_id, key), {})
            row.update({name: values[i] for name, values in columns.items()})
            if tags is not None:
                self.tags[(partition_id, key)] = dict(tags[i])
        return KVBatchMeta(keys=list(keys), tags=[self.tags.get((partition_id, k), {}) for k in keys],
                           partition_id=partition_id, fields=sorted(set().union(*(self.rows[(partition_id, k)]
                                                                                  for k in keys))))

    def kv_batch_get(self, keys, partition_id, select_fields=None):
        if any((partition_id, k) not in self.rows for k in keys):
            raise ValueError("keys or partition were not found!")
        rows = [self.rows[(partition_id, k)] for k in keys]
        names = select_fields if select_fields is not None else sorted(rows[0])
        self.gets.append(list(names))
        return TensorDict({name: _stack([row[name] for row in rows]) for name in names
                           if all(name in row for row in rows)}, batch_size=[len(keys)])


def _unstack(column) -> list:
    if isinstance(column, torch.Tensor):
        return list(column.unbind(0))
    return list(column)


def _stack(values: list):
    if all(isinstance(v, torch.Tensor) for v in values):
        return torch.nested.as_nested_tensor(values, layout=torch.jagged)
    return NonTensorStack(*values)
