from retrysafe.cli import main

main()
