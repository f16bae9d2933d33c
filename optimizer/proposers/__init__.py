from optimizer.proposers.offline import OfflineProposer
