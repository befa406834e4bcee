"""The PD soak's pieces (``benchmark/soak_pd.py``; the Ray cluster tests run them under
each kind of fault): ``load`` (streaming timed requests, each failure's cause),
``faults`` (SIGKILL/SIGSTOP and when each is back), ``resources`` (RSS, fds,
``/dev/shm``, Ray actors, growth, PNG), ``report`` (the figures)."""
