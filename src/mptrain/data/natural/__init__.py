"""Data sets whose clients are *natural*: the writers of FEMNIST, the speaking roles of
Shakespeare, the devices of FedProx's Synthetic(alpha, beta). Each sample belongs to the
client that produced it, and a federated run trains one client per id
(``--partition natural``, the default for these sets).

    clients.py     NaturalClients: which rows each client owns (offsets, O(clients) arrays),
                   train and test, grouped so that a client is one slice
    json_stream.py LEAF's JSON files walked user by user (bounded memory, no third party)
    leaf.py        --data leaf:DIR: LEAF's train/ and test/ folders, FEMNIST, Shakespeare,
                   Synthetic recognised by shape, filled straight into shared memory
    synthetic.py   --data synthetic:ALPHA,BETA and synthetic-iid: FedProx's generator
    on_demand.py   its devices drawn when a round asks for them (past 2M rows: 100,000
                   devices start in seconds and a round draws only its own)
    hf.py          --data hf:NAME or a save_to_disk folder (the optional `datasets` extra)
    progress.py    the loading progress bar (rich), stopped before any worker forks
    recipes.py     what each of these sets recommends (LEAF's and FedProx's settings)
"""
