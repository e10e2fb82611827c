"""The runners: run selected upstream tests on cpu, cuda or snpu and report results."""
