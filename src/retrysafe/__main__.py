from retrysafe._entry import main

main()
