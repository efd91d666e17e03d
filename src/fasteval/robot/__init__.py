"""Robot steps: policy loaders (fasteval's and LeRobot's), the policy runner (observation
mapping, dtype cast, normalization, chunk queues, task descriptions), recorders and fast envs."""
