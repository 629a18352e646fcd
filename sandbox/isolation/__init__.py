"""Linux isolation building blocks for the process backend, one room each.

- `programs`: bubblewrap and the interpreter run inside a sandbox;
- `credentials`: the unprivileged user a sandbox is started as;
- `seccomp`: the system-call filter;
- `cgroups`: each worker's pids and memory limits, peak and leftover processes;
- `netns`: empty network namespaces reused by one-shot sandboxes;
- `linux`: the libc calls and memfd files the others share.
"""
