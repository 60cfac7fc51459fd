from pgqueue.cli.app import main

main()
