from gatekeeper.cli.main import main

main()
