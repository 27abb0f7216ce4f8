"""Rank environments recorded from real launchers (rank 1 of 2 unless noted): what
read_identity, the agreement and framework_env are tested on."""

# Open MPI 5.0.11 (pip wheel), `mpirun -np 2 --oversubscribe --bind-to none env`, rank 1.
OMPI5 = {
    "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
    "OMPI_COMM_WORLD_NODE_RANK": "1", "OMPI_COMM_WORLD_RANK": "1",
    "OMPI_COMM_WORLD_SIZE": "2", "OMPI_UNIVERSE_SIZE": "2", "OMPI_VERSION": "5.0.11",
    "OMPI_WORLD_LOCAL_SIZE": "2", "OMPI_WORLD_SIZE": "2", "PMIX_HOSTNAME": "vm",
    "PMIX_NAMESPACE": "prterun-vm-4953@1", "PMIX_RANK": "1", "PRTE_LAUNCHED": "1",
}
# Open MPI 4.1.4 (Debian), `/usr/bin/mpirun -np 2 --oversubscribe env`, rank 1.
OMPI41 = {
    "OMPI_APP_CTX_NUM_PROCS": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
    "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "OMPI_COMM_WORLD_NODE_RANK": "1",
    "OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_FIRST_RANKS": "0",
    "OMPI_MCA_orte_ess_node_rank": "1", "OMPI_MCA_orte_num_nodes": "1",
    "OMPI_UNIVERSE_SIZE": "2", "PMIX_ID": "2140209153.1", "PMIX_NAMESPACE": "2140209153",
    "PMIX_RANK": "1", "PMIX_HOSTNAME": "vm",
}
# Open MPI across 2 hosts, 2 ranks each (docs/OPENMPI_FACTS.md: ranks 2,3 on host 2), rank 3.
OMPI_2NODES = {
    "OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4",
    "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
    "OMPI_COMM_WORLD_NODE_RANK": "1", "PMIX_RANK": "3",
}
# MPICH / Intel MPI Hydra, 4 ranks on 2 nodes, rank 3.
HYDRA = {
    "PMI_RANK": "3", "PMI_SIZE": "4", "PMI_FD": "6", "MPI_LOCALRANKID": "1",
    "MPI_LOCALNRANKS": "2", "MPIR_CVAR_CH3_INTERFACE_HOSTNAME": "node-b",
}
# srun -N2 -n4, rank 3 (second node), inside sbatch.
SLURM = {
    "SLURM_PROCID": "3", "SLURM_LOCALID": "1", "SLURM_NODEID": "1", "SLURM_NTASKS": "4",
    "SLURM_NNODES": "2", "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
    "SLURM_TASKS_PER_NODE": "2(x2)", "SLURM_STEP_ID": "0", "SLURM_JOB_ID": "77",
    "PMIX_RANK": "3",
}
PMIX_ONLY = {"PMIX_RANK": "2", "PMIX_NAMESPACE": "prterun-vm-1@1"}
