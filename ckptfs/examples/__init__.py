"""Small programs built on ckptfs: the demo agent and its fake payment service."""
